/*
 * infer_int.h - what the two forwards of infer.h share (private to
 * runtime/model): the weights found by name in a one-stage buffer, and the
 * op-table forward of infer_dev.c that infer.c hands a step to when the
 * forward was created on a backend.
 */
#ifndef QE_MODEL_INFER_INT_H
#define QE_MODEL_INFER_INT_H

#include <stdint.h>

#include "runtime/backend/backend.h"
#include "runtime/model/model.h"
#include "runtime/model/names.h"

typedef struct qe__infer_block {
	const float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb;
	const float *ln2w, *ln2b, *fc1w, *fc1b, *fc2w, *fc2b;
} qe__infer_block;

typedef struct qe__infer_weights {
	const float *wte, *wpe, *lnfw, *lnfb, *head;
	qe__infer_block *blocks; /* cfg->layers entries, owned by whoever binds */
} qe__infer_weights;

/*
 * Point w's pointers at the tensors of a buffer in names' layout that
 * starts at base (host or backend memory: only addresses are computed).
 * w->blocks must hold c->layers entries.  QE_EINVAL: the table lacks a
 * tensor the forward needs, or has it with another size.
 */
int qe__infer_bind(const qe_model_config *c, const qe_names *names, const float *base, qe__infer_weights *w);

/* The forward through backend b's op table (infer_dev.c). */
typedef struct qe__infer_dev qe__infer_dev;

/*
 * Backend memory for the parameters (zero), the key/value cache and the
 * activations of one row, and a stream.  b must outlive the forward.
 * Codes: the backend's (QE_ENOMEM ...), QE_EINVAL from the binding.  OUT
 * *out: freed with qe__infer_dev_free (NULL after a failure).
 */
int qe__infer_dev_create(const qe_model_config *cfg, const qe_names *names, qe_backend *b, qe__infer_dev **out);
void qe__infer_dev_free(qe__infer_dev *d);
/* Copy params (names->param_floats[0] host floats) into the backend's buffer; returns after the copy. */
int qe__infer_dev_load(qe__infer_dev *d, const float *params);
/*
 * Feed token at position pos (both checked by the caller) and, when logits
 * is not NULL, copy the next token's cfg->vocab logits to it (host memory)
 * once the stream is done.  Codes: the backend's.
 */
int qe__infer_dev_step(qe__infer_dev *d, int pos, int32_t token, float *logits);

#endif
