/* job_export.c: the base model's files a job's export carries over. */
#include "job_export.h"

#include <stddef.h>

const char *const taco_job_export_files[] = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    NULL,
};
