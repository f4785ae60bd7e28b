"""Language models applied to other tasks' hypotheses: a trained LM as a scorer of word
sequences (`language_model`), n-best lists (`nbest`) and their rescoring (`rescore`); shallow
fusion itself is a decoding matter (`seqc.run.decoding.fusion`)."""
