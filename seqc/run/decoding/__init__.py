"""Decoding on the host: the search rules every decoder shares (`search`), the reference decoder
over a compiled forward pass (`search.Decoder`), step decoding over an encoder and a decoder step
with explicit caches, one source or several at once (`steps`), a batch of known tokens through
the step functions (`forced`), the choice among them for a trained model (`decoders`), CTC
decoding of frame scores (`ctc`), shallow fusion of a word LM into either search (`fusion`), the
default strategies read from the catalogue (`defaults`), decoders with their tokenizers as the
commands use them (`text_decoder`), and what `seqc decode` opens, an artifact or a restored
checkpoint (`opened`).

Imports flow one way: `ctc` <- `search` <- `steps` <- `decoders` <- `text_decoder` <- `opened`,
with `forced`, `fusion` and `defaults` on their own.
"""
