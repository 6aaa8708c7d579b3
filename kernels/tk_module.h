/* tk_module.h: loading a backend module on demand (module_load.c). */
#ifndef TK_MODULE_H
#define TK_MODULE_H

#include <stddef.h>

/* dlopen (RTLD_NOW | RTLD_LOCAL) of the first of, that exists:
 *   $env_var                          a path, for tests and unusual installs
 *   <program dir>/name                the build tree
 *   <program dir>/TK_MODULE_REL_DIR/name   an installed tree
 * The handle, or NULL with why saying so (what names the module: "CUDA
 * backend"). */
void *tk_module_load(const char *env_var, const char *name, const char *what,
		     char *why, size_t why_len);

#endif
