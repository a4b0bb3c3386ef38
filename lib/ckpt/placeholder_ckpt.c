/* placeholder until the module lands */ typedef int mt_placeholder_ckpt;
