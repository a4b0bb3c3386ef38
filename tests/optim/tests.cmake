# Muon distributed as Canzona (issue: matrix optimizers at scale)
foreach(g dense moe ckpt bf16)
  mt_script_test(muon_${g} optim muon.sh ${g})
endforeach()
mt_script_test(muon_smoke sanitize muon.sh smoke)
set(T --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2)
mt_script_test(optim_unknown badinput ../scripts/expect_fail.sh optim_unknown 2
  "optim.name.*adamw.*muon" ${T} --set parallel.dp=2 --set optim.name=sgd)
mt_script_test(muon_ns_steps badinput ../scripts/expect_fail.sh muon_ns_steps 2
  "optim.muon_ns_steps" ${T} --set parallel.dp=2 --set optim.name=muon --set optim.muon_ns_steps=0)
