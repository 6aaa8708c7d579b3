/* chat_internal.h: what chat.c and chat_builtin.c share. */
#ifndef TACO_CHAT_INTERNAL_H
#define TACO_CHAT_INTERNAL_H

#include "chat.h"
#include "job/job_opts.h" /* enum taco_template */

/* The Jinja of a built-in template, NULL for another id. */
const char *taco_chat_builtin(int template_id);

#endif
