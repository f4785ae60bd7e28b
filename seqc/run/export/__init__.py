"""`seqc export` as a library: which artifacts to build (`plan`), what every artifact of one
export shares (`context`), building, gating and measuring one (`build`), its manifest and the
files beside the model (`package`), and an artifact on disk (`artifact`)."""
