/* cfg.h — the model file's syntax: `[section]` headers, `key = value` lines,
 * `#` comments (private to the model code). This layer knows nothing about
 * layers; it keeps every key with its line, refuses duplicate keys, and
 * offers strict typed getters whose errors name FILE:LINE and what is
 * accepted. What the sections mean is model.c's business. */
#ifndef RT_CFG_H
#define RT_CFG_H

#include <stdbool.h>

struct rt_cfg_entry {
    char *key, *value;
    int line;
    bool used; /* read by a getter: anything left unread is an unknown key */
};

struct rt_cfg_section {
    char *name; /* without brackets */
    int line;
    struct rt_cfg_entry *entries;
    int count, cap;
};

struct rt_cfg {
    char *file; /* the name used in messages */
    struct rt_cfg_section *sections;
    int count, cap;
    int last_line; /* for errors about something missing at the end */
};

/* Parse `text` into *out; `file` names it in messages. RT_ERR_CONFIG on a
 * syntax error or a duplicate key, RT_ERR_NOMEM; *out is NULL on error. */
int rt_cfg_parse(const char *text, const char *file, struct rt_cfg **out);
void rt_cfg_destroy(struct rt_cfg **c);

/* The entry for `key`, marked used, or NULL when absent. */
struct rt_cfg_entry *rt_cfg_find(struct rt_cfg_section *s, const char *key);

/* Typed getters. An absent key gives `def`, or an error naming the section
 * line when `required`. A present key must parse completely and lie in
 * range, else RT_ERR_CONFIG "FILE:LINE: [sec] key = value: why (accepted)". */
int rt_cfg_int(const struct rt_cfg *c, struct rt_cfg_section *s, const char *key,
               bool required, int def, int lo, int hi, int *out);
/* Range [lo, hi], or [lo, hi) when `hi_open`. */
int rt_cfg_float(const struct rt_cfg *c, struct rt_cfg_section *s, const char *key,
                 bool required, float def, double lo, double hi, bool hi_open, float *out);
/* One of `names` (NULL-terminated); *out is its index. */
int rt_cfg_choice(const struct rt_cfg *c, struct rt_cfg_section *s, const char *key,
                  const char *const *names, int def, int *out);

/* Every key of `s` must be one of `accepted` ("a, b, c"; "" for none). */
int rt_cfg_check_keys(const struct rt_cfg *c, const struct rt_cfg_section *s,
                      const char *accepted);

#endif
