"""Quantization: from the float model and calibration data to the int8 scales Gemmini computes with.

calibrate.py     one float pass over the data: every tensor's range statistics, the bias-correction means
estimators.py    a threshold from a histogram of |x|: minmax, percentile, mse, entropy (KL divergence)
range_search.py  per-tensor ranges judged by the error they cause at their consumers (--calib-method output)
selection.py     the default: whole-model candidates judged at the model outputs on held-out samples
quantize.py      the QuantTable: activation scales, int8 weights, int32 biases, bias correction
adaround.py      weight rounding by output error (--adaround)
"""
