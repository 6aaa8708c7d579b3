/* chat_builtin.c: the built-in chat templates, for models that ship none
 * (base models): Jinja of our own, rendered like any other template. They
 * render no tools. */
#include <string.h>

#include "chat_internal.h"

/* ChatML, as Qwen's instruct models frame turns. */
static const char chatml[] =
    "{%- for message in messages -%}\n"
    "{%- if message.tool_calls is defined or message.role == 'tool' -%}\n"
    "{{- raise_exception('the chatml template renders no tool calls or tool "
    "results: use a model with a template of its own') -}}\n"
    "{%- endif -%}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

/* Llama 3's headers; contents trimmed, as Meta's template does. */
static const char llama3[] =
    "{{- '<|begin_of_text|>' -}}\n"
    "{%- for message in messages -%}\n"
    "{%- if message.tool_calls is defined or message.role == 'tool' -%}\n"
    "{{- raise_exception('the llama3 template renders no tool calls or tool "
    "results: use a model with a template of its own') -}}\n"
    "{%- endif -%}\n"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + "
    "message.content | trim + '<|eot_id|>' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "{%- endif -%}\n";

/* Mistral's [INST] turns; a system message opens the first user turn. */
static const char mistral[] =
    "{{- bos_token -}}\n"
    "{%- set offset = 1 if messages and messages[0].role == 'system' else 0 "
    "-%}\n"
    "{%- for message in messages[offset:] -%}\n"
    "{%- if message.role not in ['user', 'assistant'] or (message.role == "
    "'user') != (loop.index0 % 2 == 0) -%}\n"
    "{{- raise_exception('the mistral template needs user and assistant "
    "turns alternating, starting with user, after at most one system "
    "message') -}}\n"
    "{%- endif -%}\n"
    "{%- if message.tool_calls is defined -%}\n"
    "{{- raise_exception('the mistral template renders no tool calls: use a "
    "model with a template of its own') -}}\n"
    "{%- endif -%}\n"
    "{%- if message.role == 'user' -%}\n"
    "{{- '[INST] ' -}}\n"
    "{%- if loop.first and offset -%}\n"
    "{{- messages[0].content + '\\n\\n' -}}\n"
    "{%- endif -%}\n"
    "{{- message.content + ' [/INST]' -}}\n"
    "{%- else -%}\n"
    "{{- message.content + eos_token -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

const char *taco_chat_builtin(int template_id)
{
	switch (template_id) {
	case TACO_TEMPLATE_CHATML:
		return chatml;
	case TACO_TEMPLATE_LLAMA3:
		return llama3;
	case TACO_TEMPLATE_MISTRAL:
		return mistral;
	}
	return NULL;
}

const char *taco_chat_trained_jinja(int template_id, const char *jinja)
{
	if (jinja && *jinja)
		return jinja;
	return taco_chat_builtin(template_id);
}
