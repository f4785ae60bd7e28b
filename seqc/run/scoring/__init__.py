"""Figures of a trained model or an exported artifact: loss and perplexity (`evaluate`), BLEU
and chrF of translations (`translate`), WER and CER of transcripts (`wer`, `transcribe`), and an
artifact scored on a split as its checkpoint is (`artifact_eval`)."""
