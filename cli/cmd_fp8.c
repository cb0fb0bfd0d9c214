/*
 * cmd_fp8.c - `qeffect fp8 cast`: FP8 (and bf16) conversions as the hardware
 * does them.
 *
 * A way to ask "what does the GPU make of this float?" without a GPU, and to
 * check the emulation against the vector file from the shell: `--bits` reads
 * float32 bit patterns and prints the four codes in the vector file's column
 * order, so a diff against that file is the whole test (tests/cli/fp8_cast.sh).
 */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/fp8/bf16.h"
#include "runtime/fp8/fp8.h"

static const char fp8_usage[] =
	"usage: qeffect fp8 cast [--json] VALUE...\n"
	"       qeffect fp8 cast --bits < BITS\n"
	"\n"
	"Convert float32 values to FP8 exactly as an H200 does (__nv_cvt_float_to_fp8):\n"
	"round to nearest even, subnormals, NaN -> 0x7f, and either saturation to the max\n"
	"finite value (SATFINITE, what TransformerEngine uses; 'sat') or not ('nosat':\n"
	"overflow becomes NaN in E4M3, inf in E5M2).  Max finite: E4M3 448, E5M2 57344.\n"
	"The bf16 code is __float2bfloat16_rn's: round to nearest even, no saturation\n"
	"(past 3.3895314e38 it is inf), subnormals kept, every NaN -> 7fff.\n"
	"\n"
	"  VALUE     a decimal or hex float (strtof syntax: 448, -1e-3, 0x1.cp8, inf, nan);\n"
	"            it is first rounded to float32, as a float32 tensor would hold it.\n"
	"            For each value: its float32 bits, then the E4M3 and E5M2 codes with\n"
	"            and without saturation and the bf16 code, each with the value the\n"
	"            code decodes to.\n"
	"  --json    print {\"values\": [...]} instead of a table; each entry has input,\n"
	"            f32_bits, value, e4m3/e5m2 objects with sat/nosat {code, value},\n"
	"            and bf16 {code, value}.  FP8 codes are two lowercase hex digits,\n"
	"            bf16 codes four; non-finite values are the strings \"nan\",\n"
	"            \"inf\", \"-inf\".\n"
	"  --bits    read float32 bit patterns in hex (e.g. 43e80000), one per line,\n"
	"            from standard input; print one line per input with four codes:\n"
	"              e4m3sat e5m2sat e4m3nosat e5m2nosat\n"
	"            (the columns 2-5 of data/fp8-vectors.txt).  Blank lines are skipped.\n"
	"\n"
	"Exit status: 0 ok, 2 bad usage or an unparseable value (named in the message).\n"
	"Example (prints columns 2-5 of the vector file):\n"
	"  grep -Ev '^(#|d )' fp8-vectors.txt | cut -d' ' -f1 | qeffect fp8 cast --bits\n";

/* The four codes of x in the vector file's column order. */
static void four_codes(float x, uint8_t c[4])
{
	c[0] = qe_fp8_encode(x, QE_E4M3, 1);
	c[1] = qe_fp8_encode(x, QE_E5M2, 1);
	c[2] = qe_fp8_encode(x, QE_E4M3, 0);
	c[3] = qe_fp8_encode(x, QE_E5M2, 0);
}

static int parse_value(const char *s, float *out)
{
	char *end;
	errno = 0;
	float v = strtof(s, &end);
	/* ERANGE is fine: 1e39 is inf as a float32 and 1e-50 is 0, which is what a cast sees */
	if (end == s || *end) {
		fprintf(stderr, "qeffect fp8 cast: '%s' is not a number (want e.g. 448, -1e-3, 0x1.cp8, inf, nan)\n", s);
		return 2;
	}
	*out = v;
	return 0;
}

/* A decoded value for the table: %.9g, with nan/inf spelled the same everywhere. */
static void fmt_value(char *buf, size_t len, float v)
{
	if (isnan(v))
		snprintf(buf, len, "nan");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "inf" : "-inf");
	else
		snprintf(buf, len, "%.9g", (double)v);
}

static json_t *json_value(float v)
{
	char buf[32];
	if (!isfinite(v)) {
		fmt_value(buf, sizeof buf, v);
		return json_string(buf);
	}
	return json_real((double)v);
}

static json_t *json_code(uint8_t code, qe_dtype fmt)
{
	char hex[3];
	snprintf(hex, sizeof hex, "%02x", code);
	return json_pack("{s:s, s:o}", "code", hex, "value", json_value(qe_fp8_decode(code, fmt)));
}

static json_t *json_bf16(float x)
{
	char hex[5];
	uint16_t code = qe_bf16_from_f32(x);
	snprintf(hex, sizeof hex, "%04x", code);
	return json_pack("{s:s, s:o}", "code", hex, "value", json_value(qe_bf16_to_f32(code)));
}

static int cast_json(int n, char **vals, const float *xs)
{
	json_t *arr = json_array();
	for (int i = 0; i < n; i++) {
		uint8_t c[4];
		char bits[9];
		four_codes(xs[i], c);
		snprintf(bits, sizeof bits, "%08x", qe_f32_bits(xs[i]));
		json_t *e = json_pack("{s:s, s:s, s:o, s:{s:o, s:o}, s:{s:o, s:o}, s:o}", "input", vals[i], "f32_bits",
				      bits, "value", json_value(xs[i]), "e4m3", "sat", json_code(c[0], QE_E4M3), "nosat",
				      json_code(c[2], QE_E4M3), "e5m2", "sat", json_code(c[1], QE_E5M2), "nosat",
				      json_code(c[3], QE_E5M2), "bf16", json_bf16(xs[i]));
		if (!e || json_array_append_new(arr, e) != 0) {
			json_decref(arr);
			fprintf(stderr, "qeffect fp8 cast: out of memory building JSON\n");
			return 1;
		}
	}
	json_t *doc = json_pack("{s:o}", "values", arr);
	char *s = doc ? json_dumps(doc, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
	json_decref(doc);
	if (!s) {
		fprintf(stderr, "qeffect fp8 cast: out of memory building JSON\n");
		return 1;
	}
	printf("%s\n", s);
	free(s);
	return 0;
}

static void cast_table(int n, char **vals, const float *xs)
{
	static const char *const heads[4] = { "e4m3 sat", "e5m2 sat", "e4m3 nosat", "e5m2 nosat" };
	static const qe_dtype fmts[4] = { QE_E4M3, QE_E5M2, QE_E4M3, QE_E5M2 };
	printf("%-16s %-15s %-8s", "input", "float32", "bits");
	for (int k = 0; k < 4; k++)
		printf("  %-19s", heads[k]);
	printf("  bf16\n");
	for (int i = 0; i < n; i++) {
		uint8_t c[4];
		char v[32];
		four_codes(xs[i], c);
		fmt_value(v, sizeof v, xs[i]);
		printf("%-16s %-15s %08x", vals[i], v, qe_f32_bits(xs[i]));
		for (int k = 0; k < 4; k++) {
			char cell[40];
			fmt_value(v, sizeof v, qe_fp8_decode(c[k], fmts[k]));
			snprintf(cell, sizeof cell, "%02x = %s", c[k], v);
			printf("  %-19s", cell);
		}
		uint16_t b = qe_bf16_from_f32(xs[i]);
		fmt_value(v, sizeof v, qe_bf16_to_f32(b));
		printf("  %04x = %s\n", b, v);
	}
}

/* One hex float32 bit pattern: up to 8 hex digits, optional 0x, surrounding blanks. */
static int parse_bits(char *line, uint32_t *out, int *blank)
{
	char *p = line;
	while (*p == ' ' || *p == '\t')
		p++;
	char *e = p + strlen(p);
	while (e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	*blank = (*p == '\0');
	if (*blank)
		return 0;
	char *digits = p;
	if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
		digits += 2;
	size_t nd = strlen(digits);
	if (nd == 0 || nd > 8 || strspn(digits, "0123456789abcdefABCDEF") != nd)
		return -1;
	*out = (uint32_t)strtoul(digits, NULL, 16);
	return 0;
}

static int cast_bits(void)
{
	char line[256];
	long lineno = 0;
	static char obuf[1 << 16];
	setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
	while (fgets(line, sizeof line, stdin)) {
		lineno++;
		size_t len = strlen(line);
		if (len == sizeof line - 1 && line[len - 1] != '\n') {
			fprintf(stderr, "qeffect fp8 cast --bits: stdin line %ld is too long to be a float32 bit pattern\n",
				lineno);
			return 2;
		}
		uint32_t bits;
		int blank;
		if (parse_bits(line, &bits, &blank) != 0) {
			fprintf(stderr,
				"qeffect fp8 cast --bits: stdin line %ld: '%s' is not a float32 bit pattern "
				"(want up to 8 hex digits, e.g. 43e80000)\n",
				lineno, line);
			return 2;
		}
		if (blank)
			continue;
		uint8_t c[4];
		four_codes(qe_f32_from_bits(bits), c);
		printf("%02x %02x %02x %02x\n", c[0], c[1], c[2], c[3]);
	}
	if (ferror(stdin)) {
		fprintf(stderr, "qeffect fp8 cast --bits: reading standard input: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

static int cmd_cast(int argc, char **argv)
{
	int json = 0, bits = 0, nvals = 0;
	char **vals = calloc((size_t)argc, sizeof *vals);
	float *xs = calloc((size_t)argc, sizeof *xs);
	int rc = 0;
	if (!vals || !xs) {
		fprintf(stderr, "qeffect fp8 cast: out of memory\n");
		rc = 1;
		goto out;
	}
	int opts = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (opts && strcmp(a, "--") == 0) {
			opts = 0;
		} else if (opts && strcmp(a, "--json") == 0) {
			json = 1;
		} else if (opts && strcmp(a, "--bits") == 0) {
			bits = 1;
		} else if (opts && strncmp(a, "--", 2) == 0) {
			fprintf(stderr, "qeffect fp8 cast: unknown flag '%s' (see 'qeffect fp8 --help')\n", a);
			rc = 2;
			goto out;
		} else {
			/* "-1" and "-inf" are values, not flags */
			rc = parse_value(a, &xs[nvals]);
			if (rc)
				goto out;
			vals[nvals++] = argv[i];
		}
	}
	if (bits) {
		if (nvals || json) {
			fprintf(stderr, "qeffect fp8 cast: --bits reads standard input and takes no values and no --json\n");
			rc = 2;
			goto out;
		}
		rc = cast_bits();
		goto out;
	}
	if (nvals == 0) {
		fprintf(stderr, "qeffect fp8 cast: give at least one VALUE (or --bits)\n\n%s", fp8_usage);
		rc = 2;
		goto out;
	}
	if (json)
		rc = cast_json(nvals, vals, xs);
	else
		cast_table(nvals, vals, xs);
out:
	free(vals);
	free(xs);
	if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
		fprintf(stderr, "qeffect fp8 cast: writing standard output: %s\n", strerror(errno));
		rc = 1;
	}
	return rc;
}

int cli_fp8_main(int argc, char **argv)
{
	if (cli_wants_help(argc, argv)) {
		fputs(fp8_usage, stdout);
		return 0;
	}
	if (argc < 2) {
		fputs(fp8_usage, stderr);
		return 2;
	}
	if (strcmp(argv[1], "cast") == 0)
		return cmd_cast(argc - 1, argv + 1);
	fprintf(stderr, "qeffect fp8: unknown subcommand '%s' (the one there is: cast)\n\n%s", argv[1], fp8_usage);
	return 2;
}
