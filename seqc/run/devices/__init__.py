"""What the `seqc place`, `seqc profile` and `seqc calibrate` commands run: placing a model's
ops on memory-limited devices and printing the plan (`place`), timing a model's ops on this
machine (`profile`), and measuring the devices' speed and links for the cost model
(`calibrate`).
"""
