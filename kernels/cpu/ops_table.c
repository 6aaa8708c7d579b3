/* ops_table.c: the CPU backend's op table. */
#include "cpu_ops.h"

static const tk_ops cpu_ops = {
    .name = "cpu",
    .alloc = tk_cpu_alloc,
    .free = tk_cpu_free,
    .mem_current = tk_cpu_mem_current,
    .mem_peak = tk_cpu_mem_peak,
    .mem_reset_peak = tk_cpu_mem_reset_peak,
    .upload = tk_cpu_upload,
    .download = tk_cpu_download,
    .memset0 = tk_cpu_memset0,
    .host_alloc = tk_cpu_host_alloc,
    .host_free = tk_cpu_host_free,
    .host_current = tk_cpu_host_current,
    .host_peak = tk_cpu_host_peak,
    .copy_async = tk_cpu_copy_async,
    .copy_wait = tk_cpu_copy_wait,
    .side_begin = tk_cpu_side_begin,
    .side_end = tk_cpu_side_end,
    .side_wait = tk_cpu_side_wait,
    .to_f32 = tk_cpu_to_f32,
    .convert = tk_cpu_convert,
    .matmul = tk_cpu_matmul,
    .add = tk_cpu_add,
    .bias_fwd = tk_cpu_bias_fwd,
    .bias_bwd = tk_cpu_bias_bwd,
    .embedding_fwd = tk_cpu_embedding_fwd,
    .embedding_bwd = tk_cpu_embedding_bwd,
    .rmsnorm_fwd = tk_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = tk_cpu_rmsnorm_bwd,
    .rope_fwd = tk_cpu_rope_fwd,
    .rope_bwd = tk_cpu_rope_bwd,
    .attention_fwd = tk_cpu_attention_fwd,
    .attention_bwd = tk_cpu_attention_bwd,
    .swiglu_fwd = tk_cpu_swiglu_fwd,
    .swiglu_bwd = tk_cpu_swiglu_bwd,
    .ce_stats = tk_cpu_ce_stats,
    .ce_finish = tk_cpu_ce_finish,
    .ce_grad = tk_cpu_ce_grad,
    .taco_update = tk_cpu_taco_update,
    .taco_scan_bytes = tk_cpu_taco_scan_bytes,
    .taco_begin = tk_cpu_taco_begin,
    .taco_feed = tk_cpu_taco_feed,
    .taco_finish = tk_cpu_taco_finish,
    .adamw_update = tk_cpu_adamw_update,
};

const tk_ops *tk_cpu_ops(void)
{
	return &cpu_ops;
}
