#include "epilogue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent-load.h"
#include "agent-window.h"
#include "json.h"
#include "report.h"
#include "view/view.h"

#define JSON_TOP 5

static void json_top(FILE *f, const struct profile *p)
{
	struct view_func *fn = NULL;
	size_t index, n = 0;

	fputs("\"top\":[", f);
	if (p && view_sample_index(p, NULL, &index) == 0 &&
	    view_functions(p, index, &fn, &n) == 0) {
		for (size_t i = 0; i < n && i < JSON_TOP; i++) {
			fputs(i ? ",{\"function\":" : "{\"function\":", f);
			json_string(f, fn[i].name);
			fprintf(f, ",\"flat\":%lld,\"cum\":%lld}", (long long)fn[i].flat,
				(long long)fn[i].cum);
		}
	}
	fputs("]", f);
	if (p && view_sample_index(p, NULL, &index) == 0) {
		fputs(",\"sample_type\":", f);
		json_string(f, p->sample_types[index].type);
		fputs(",\"unit\":", f);
		json_string(f, p->sample_types[index].unit);
		fprintf(f, ",\"total\":%lld", (long long)profile_total(p, index));
	}
	free(fn);
}

static int write_json(const struct epilogue_facts *f)
{
	printf("{\"command\":");
	json_string(stdout, f->command);
	printf(",\"pid\":%d,", (int)f->pid);
	if (f->pids) {
		printf("\"processes\":[");
		for (size_t i = 0; i < f->npids; i++)
			printf("%s%d", i ? "," : "", (int)f->pids[i]);
		printf("],");
	}
	printf("\"output\":");
	json_string(stdout, f->output);
	/* Times in ns, as the pprof file and manifest.json give them; the
	 * _s and _ms keys are their old names, kept for a release. */
	printf(",\"exit\":%d,\"duration_ns\":%llu,\"samples\":%llu,\"lost\":%llu,"
	       "\"duration_s\":%.6f,",
	       f->exit_code, (unsigned long long)f->duration_ns, (unsigned long long)f->samples,
	       (unsigned long long)f->lost, f->duration_ns / 1e9);
	if (f->pause_ns >= 0)
		printf("\"pause_ns\":%lld,\"pause_ms\":%.3f,", (long long)f->pause_ns,
		       f->pause_ns / 1e6);
	else
		printf("\"pause_ns\":null,\"pause_ms\":null,");
	json_top(stdout, f->profile);
	printf("}\n");
	report_json_printed();
	if (fflush(stdout) != 0 || ferror(stdout))
		return -EIO;
	return 0;
}

int epilogue_report(const struct common_opts *o, const struct epilogue_facts *f)
{
	size_t index;

	if (o->top && !option_output_is_top(o) && f->profile &&
	    view_sample_index(f->profile, NULL, &index) == 0) {
		fflush(stderr);
		view_write_top(f->profile, index, (size_t)o->top, stderr);
	}
	if (o->json)
		return write_json(f);
	return 0;
}
