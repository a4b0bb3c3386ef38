/* What the files of lib/ckpt/interop share about Hugging Face models
 * (private to lib/ckpt/interop): config.json in hf_config.c, the tensors
 * and their names in hf.c. */
#ifndef MT_CKPT_HF_INTERNAL_H
#define MT_CKPT_HF_INTERNAL_H

#include "ckpt/interop/safetensors.h"

/* The transformers class of a config: GPT-2, Llama, or Llama with experts
 * in every block (Mixtral) */
enum { MT_HF_GPT2 = 1, MT_HF_LLAMA = 2, MT_HF_MIXTRAL = 3 };
int mt_hf_family(const mt_ckpt_hf_config *c);
/* (what a class can hold: mt_ckpt_hf_check_exportable, ckpt.h) */

/* config.json's text for c (malloc'd): dtype names the stored tensors'
 * type (torch_dtype), step the checkpoint's step */
char *mt_hf_config_json(const mt_ckpt_hf_config *c, int dtype, int64_t step);

#endif
