/* runtime.h: process set-up shared by the binaries. */
#ifndef TACO_RUNTIME_H
#define TACO_RUNTIME_H

/* Makes OpenMP threads wait passively. Spinning waiters cost the CPU
 * backend up to 3x on a shared machine with few cores (measured: 5.7 s
 * against 1.6 s per step on 2 cores), and libgomp reads OMP_WAIT_POLICY only
 * when it loads, so when the variable is unset this sets it and re-executes
 * the binary once. Returns only when nothing needed doing or exec failed.
 * Call first thing in main. */
void taco_runtime_init(char **argv);

#endif
