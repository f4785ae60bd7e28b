"""Decoding on the host: the search rules every decoder shares (`search`), the reference decoder
over a compiled forward pass (`search.Decoder`), step decoding over an encoder and a decoder step
with explicit caches, one source or several at once (`steps`), a batch of known tokens through
the step functions (`forced`), the choice among them for a trained model (`decoders`), CTC
decoding of frame scores (`ctc`), the default strategies read from the catalogue (`defaults`),
and decoders with their tokenizers as the commands use them (`text_decoder`).

Imports flow one way: `search` <- `steps` <- `decoders` <- `text_decoder`, with `forced`, `ctc`
and `defaults` on their own.
"""
