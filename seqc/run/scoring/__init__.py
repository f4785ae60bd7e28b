"""Figures of a trained model or an exported artifact: loss and perplexity of a model over a
split (`evaluate`), BLEU and chrF of translations (`translate`), WER and CER of transcripts
(`wer`, `transcribe`); and `seqc eval`'s two jobs built on them: a run's checkpoint scored on a
split (`checkpoint_eval`), and an artifact scored as its checkpoint is (`artifact_eval`)."""
