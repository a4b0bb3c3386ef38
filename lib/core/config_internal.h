/* What the configuration's files share: the key table (config_keys.c), the
 * parser and writer (config.c) and the checks across keys (config_check.c).
 * Not part of core's public header. */
#ifndef MT_CONFIG_INTERNAL_H
#define MT_CONFIG_INTERNAL_H

#include <float.h>
#include <math.h>

#include "core/core.h"

/* Exclusive bounds, stored as the nearest inclusive double so the public
 * [min, max] stays exact: "> 0" is ">= DBL_TRUE_MIN", "< 1" is
 * "<= 1 - 2^-53". config.c's describe_range prints them back as "> 0" and
 * "< 1". */
#define MT_CFG_GT0 DBL_TRUE_MIN
#define MT_CFG_LT1 (1.0 - DBL_EPSILON / 2)
#define MT_CFG_NOMAX INFINITY
#define MT_CFG_NOMIN (-INFINITY)

/* the key named name ("section.key"), or NULL */
const mt_cfg_key *mt_cfg_find_key(const char *name);
/* An enumerated key's choice: the enum value of the choice spelled by the
 * len bytes at text, or -1 when none is (or k has no choices). */
int mt_cfg_choice_value(const mt_cfg_key *k, const char *text, size_t len);
/* the text of k's choice whose enum value is value, or NULL */
const char *mt_cfg_choice_name(const mt_cfg_key *k, int value);
/* Whether k's choices string and its enum's table list the same names in
 * the same order (the table is what the parser uses, the string what
 * --help and the error messages show); why names the first difference. */
int mt_cfg_choices_agree(const mt_cfg_key *k, char *why, size_t size);

#endif
