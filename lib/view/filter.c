/*
 * Label filters: go tool pprof's -tagfocus and -tagignore
 * (internal/driver/driver_focus.go, compileTagFilter), with its rules:
 *
 *   KEY=RE1,RE2  a string label KEY whose value one of the regexes matches
 *                (unanchored); a sample without label KEY does not match
 *   RE1,RE2      every regex matches some string label as "key:value"
 *   [KEY=]N, N:, :N, N:M
 *                a numeric label (KEY, or any) equal to N, at least N, at
 *                most N, between N and M (both included)
 *
 * pprof's regexes are RE2, ours POSIX extended: the same for the patterns
 * labels are filtered by (words, alternatives, anchors, classes). A number
 * with a unit (pprof's "4mb:") is refused rather than compared wrongly.
 */
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "view-private.h"

struct tag_match {
  char *text;  /* "tagfocus=SPEC": pprof's "Active filters:" line */
  char *key;   /* NULL: any label */
  bool ignore; /* tagignore: a match drops the sample */
  bool range;  /* numeric: lo..hi, else the regexes */
  int64_t lo, hi;
  regex_t *res;
  size_t nres;
};

struct view_filter {
  struct tag_match *m;
  size_t n, alloc;
};

/* "[+-]digits" at *s, then letters (a unit): pprof's tagFilterRangeRx. */
static bool parse_number(const char **s, int64_t *ret, bool *ret_unit) {
  const char *p = *s;
  char *end;

  if (*p == '+' || *p == '-')
    p++;
  if (*p < '0' || *p > '9')
    return false;
  errno = 0;
  *ret = strtoll(*s, &end, 10);
  if (errno)
    return false;
  *ret_unit = (*end >= 'a' && *end <= 'z') || (*end >= 'A' && *end <= 'Z');
  while ((*end >= 'a' && *end <= 'z') || (*end >= 'A' && *end <= 'Z'))
    end++;
  *s = end;
  return true;
}

/*
 * N, N:, :N or N:M taking all of @v: 1 (a range, in m), 0 (a regex, as pprof
 * reads anything else), -EOPNOTSUPP for a number with a unit.
 */
static int parse_range(const char *v, struct tag_match *m) {
  const char *p = v;
  bool unit = false, unit2 = false;
  int64_t a, b;

  m->lo = INT64_MIN;
  m->hi = INT64_MAX;
  if (*p == ':') {
    p++;
    if (!parse_number(&p, &b, &unit) || *p)
      return 0;
    m->hi = b;
  } else {
    if (!parse_number(&p, &a, &unit))
      return 0;
    m->lo = a;
    if (*p == '\0') {
      m->hi = a;
    } else if (*p++ != ':') {
      return 0;
    } else if (*p) {
      if (!parse_number(&p, &b, &unit2) || *p)
        return 0;
      m->hi = b;
    }
  }
  return unit || unit2 ? -EOPNOTSUPP : 1;
}

/* The comma-separated regexes of @v, compiled into m->res; as pprof, every
 * part is one, an empty part too (it matches anything). */
static int compile_regexes(const char *v, struct tag_match *m, char *why,
                           size_t size) {
  size_t count = 1;

  for (const char *c = v; *c; c++)
    count += *c == ',';
  m->res = calloc(count, sizeof(*m->res));
  if (!m->res)
    return -ENOMEM;
  for (const char *part = v; m->nres < count; part += strcspn(part, ",") + 1) {
    size_t len = strcspn(part, ",");
    char *one = strndup(part, len), msg[128];
    int e;

    if (!one)
      return -ENOMEM;
    e = regcomp(&m->res[m->nres], one, REG_EXTENDED | REG_NOSUB);
    if (e) {
      regerror(e, &m->res[m->nres], msg, sizeof(msg));
      snprintf(why, size, "'%s' is not a regular expression: %s", one, msg);
      free(one);
      return -EINVAL;
    }
    free(one);
    m->nres++;
  }
  return 0;
}

static void tag_match_release(struct tag_match *m) {
  for (size_t i = 0; i < m->nres; i++)
    regfree(&m->res[i]);
  free(m->res);
  free(m->key);
  free(m->text);
}

static int tag_match_parse(struct tag_match *m, bool ignore, const char *spec,
                           char *why, size_t size) {
  const char *eq = strchr(spec, '='), *value = eq ? eq + 1 : spec;
  int r;

  m->ignore = ignore;
  if (asprintf(&m->text, "%s=%s", ignore ? "tagignore" : "tagfocus", spec) <
      0) {
    m->text = NULL;
    return -ENOMEM;
  }
  if (eq && !(m->key = strndup(spec, (size_t)(eq - spec))))
    return -ENOMEM;
  if (!*value) {
    snprintf(why, size, "'%s' has no value to match", spec);
    return -EINVAL;
  }
  r = parse_range(value, m);
  if (r == -EOPNOTSUPP)
    snprintf(why, size,
             "'%s': a number with a unit is not supported; give the "
             "label's value as it is stored",
             value);
  if (r != 0) {
    m->range = r > 0;
    return r < 0 ? r : 0;
  }
  return compile_regexes(value, m, why, size);
}

int view_filter_add(struct view_filter **f, bool ignore, const char *spec,
                    char *why, size_t size) {
  struct tag_match m = {0};
  int r;

  if (!*f && !(*f = calloc(1, sizeof(**f))))
    return -ENOMEM;
  r = tag_match_parse(&m, ignore, spec, why, size);
  if (r == 0)
    r = GROW((*f)->m, (*f)->n + 1, (*f)->alloc);
  if (r < 0) {
    if (r == -ENOMEM)
      snprintf(why, size, "out of memory");
    tag_match_release(&m);
    return r;
  }
  (*f)->m[(*f)->n++] = m;
  return 0;
}

void view_filter_free(struct view_filter *f) {
  if (!f)
    return;
  for (size_t i = 0; i < f->n; i++)
    tag_match_release(&f->m[i]);
  free(f->m);
  free(f);
}

static bool matches_text(const struct tag_match *m, const char *s) {
  for (size_t i = 0; i < m->nres; i++)
    if (regexec(&m->res[i], s, 0, NULL, 0) == 0)
      return true;
  return false;
}

/* Without a key, every regex must match some string label's "key:value". */
static bool matches_any_label(const struct tag_match *m,
                              const struct profile_sample *s) {
  char buf[1024];

  for (size_t i = 0; i < m->nres; i++) {
    bool found = false;

    for (size_t l = 0; l < s->nlabels && !found; l++) {
      if (!s->labels[l].str)
        continue;
      snprintf(buf, sizeof(buf), "%s:%s", s->labels[l].key, s->labels[l].str);
      found = regexec(&m->res[i], buf, 0, NULL, 0) == 0;
    }
    if (!found)
      return false;
  }
  return true;
}

static bool tag_match_sample(const struct tag_match *m,
                             const struct profile_sample *s) {
  if (!m->range && !m->key)
    return matches_any_label(m, s);
  for (size_t l = 0; l < s->nlabels; l++) {
    const struct profile_label *lb = &s->labels[l];

    if (m->key && strcmp(lb->key, m->key))
      continue;
    if (m->range && !lb->str && lb->num >= m->lo && lb->num <= m->hi)
      return true;
    if (!m->range && lb->str && matches_text(m, lb->str))
      return true;
  }
  return false;
}

bool view_filter_keeps(const struct view_filter *f,
                       const struct profile_sample *s) {
  if (!f)
    return true;
  for (size_t i = 0; i < f->n; i++)
    if (tag_match_sample(&f->m[i], s) == f->m[i].ignore)
      return false;
  return true;
}

size_t view_filter_count(const struct view_filter *f) { return f ? f->n : 0; }

const char *view_filter_text(const struct view_filter *f, size_t i) {
  return f && i < f->n ? f->m[i].text : NULL;
}

int view_filter_apply(const struct profile *p, const struct view_filter *f,
                      struct profile *ret_view,
                      struct profile_sample **ret_kept) {
  struct profile_sample *kept = calloc(p->nsamples + 1, sizeof(*kept));
  size_t n = 0;

  if (!kept)
    return -ENOMEM;
  for (size_t i = 0; i < p->nsamples; i++)
    if (view_filter_keeps(f, &p->samples[i]))
      kept[n++] = p->samples[i];
  *ret_view = *p;
  ret_view->samples = kept;
  ret_view->nsamples = n;
  ret_view->samples_alloc = n;
  *ret_kept = kept;
  return 0;
}
