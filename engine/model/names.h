/* names.h: each family's tensors as its checkpoints name them (internal
 * to engine/model). */
#ifndef TACO_MODEL_NAMES_H
#define TACO_MODEL_NAMES_H

#include "model.h"

/* The roles of the tensors outside the layers. */
enum taco_model_role {
	TACO_T_EMBED = 0,
	TACO_T_HEAD, /* an untied head */
	TACO_T_FINAL_NORM,
	TACO_T_FINAL_NORM_BIAS,
	TACO_T_POS,	 /* OPT's learned positions */
	TACO_T_PROJ_IN,	 /* OPT's project_in */
	TACO_T_PROJ_OUT, /* OPT's project_out */
};

/* Most tensors outside the layers any family has. */
#define TACO_MODEL_TENSORS_MAX 8

typedef struct taco_model_tensor {
	int role;
	const char *name;
	int ndim;
	int64_t shape[2];
} taco_model_tensor;

/* Layer l's tensor in slot: its name into buf and shape, returning ndim (1
 * or 2), or 0 when the config has no such tensor. */
int taco_layer_tensor_name(const taco_config *c, int l, int slot, char *buf,
			   size_t len, int64_t shape[2]);

/* Expert e of layer l's tensor x (TACO_X_*): its name into buf and shape,
 * returning ndim (1 or 2), or 0 when layer l has no experts or the family
 * no such tensor. */
int taco_expert_tensor_name(const taco_config *c, int l, int e, int x,
			    char *buf, size_t len, int64_t shape[2]);

/* Whether name is expert e's slice "<fused>[e]" of a fused tensor: the
 * fused tensor's name into fused (len bytes) and e. */
int taco_expert_view(const char *name, char *fused, size_t len, int *e);

/* The tensors outside the layers into out (TACO_MODEL_TENSORS_MAX):
 * their count. */
int taco_model_tensor_names(const taco_config *c, taco_model_tensor *out);

#endif
