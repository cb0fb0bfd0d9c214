/*
 * test_train_tiny.c - a single-process run of the tiny model (all four
 * layers in one process) on byte tokens of the Brown corpus lowers the loss
 * over 100 steps, and two runs with the same seed are byte-identical
 * (losses and final parameters, FP8 meta and AdamW moments).
 */
#include <stdio.h>

#include "model_util.h"
#include "runtime/job/data.h"

#define SEED 42
#define M 2
#define STEPS 100

static void run(const qe_data *data, float *losses, unsigned char **state, size_t *nstate)
{
	qe_model_config cfg;
	qe_precision prec = { 0 };
	mu_pipe p;
	CHECK_OK(qe_model_preset("tiny", &cfg));
	prec.mode = QE_PREC_FP8;
	prec.recipe = qe_fp8_recipe_default();
	prec.recipe.history_len = 4;
	CHECK_OK(mu_pipe_open(&p, &cfg, &prec, M, SEED));
	qe_adamw_config oc = qe_adamw_config_default();
	oc.lr = 3e-3f;
	int32_t tok[256], tgt[256];
	for (int step = 0; step < STEPS; step++) {
		for (int m = 0; m < M; m++) {
			CHECK_OK(qe_data_sample(data, 0, SEED, step, 0, m, cfg.seq, tok, tgt));
			CHECK_OK(mu_forward(&p, m, tok, tgt));
		}
		for (int m = 0; m < M; m++)
			for (int s = p.nstages - 1; s >= 0; s--) {
				CHECK_OK(mu_dI(&p, s, m));
				CHECK_OK(mu_dW(&p, s, m));
			}
		CHECK_OK(mu_optimize(&p, &oc));
		losses[step] = mu_loss(&p);
		if (step % 20 == 0 || step == STEPS - 1)
			printf("step %3d loss %.4f\n", step, losses[step]);
	}
	*nstate = 0;
	*state = NULL;
	for (int s = 0; s < p.nstages; s++) {
		size_t np = qe_stage_param_floats(p.st[s]) * 4, nm = qe_stage_fp8_meta_floats(p.st[s]) * 4;
		*state = realloc(*state, *nstate + 3 * np + nm);
		memcpy(*state + *nstate, qe_stage_params(p.st[s]), np);
		memcpy(*state + *nstate + np, p.opt[s]->m, np);
		memcpy(*state + *nstate + 2 * np, p.opt[s]->v, np);
		memcpy(*state + *nstate + 3 * np, qe_stage_fp8_meta(p.st[s]), nm);
		*nstate += 3 * np + nm;
	}
	mu_pipe_close(&p);
}

int main(void)
{
	qe_data data;
	char path[1024];
	const char *src = qe_test_shared_path("data/brown.jsonl", path, sizeof(path));
	printf("seed %d, data %s\n", SEED, src ? src : "(built-in text: shared data absent)");
	CHECK_OK(qe_data_load(src, &data));
	float a[STEPS], b[STEPS];
	unsigned char *sa, *sb;
	size_t na, nb;
	run(&data, a, &sa, &na);
	run(&data, b, &sb, &nb);
	double first = 0, last = 0;
	for (int i = 0; i < 10; i++) {
		first += a[i] / 10;
		last += a[STEPS - 10 + i] / 10;
	}
	printf("mean loss of steps 0-9: %.4f, of steps 90-99: %.4f\n", first, last);
	CHECK(last < first - 0.5, "loss did not fall: %.4f -> %.4f", first, last);
	CHECK(memcmp(a, b, sizeof(a)) == 0, "two runs with seed %d gave different losses", SEED);
	CHECK(na == nb && memcmp(sa, sb, na) == 0, "two runs with seed %d ended in different state (%zu bytes)", SEED,
	      na);
	printf("state of two runs: %zu bytes each, identical: %s\n", na, na == nb && !memcmp(sa, sb, na) ? "yes" : "no");
	free(sa);
	free(sb);
	qe_data_free(&data);
	return qe_test_done("train_tiny");
}
