"""Admin's profiling pass (Liu et al. 2020, "Understanding the Difficulty of Training
Transformers"; its code is Transformer-Clinic's `--init-type adaptive`).

Admin is a post-LN Transformer whose every residual is scaled: x_i = LN(w_i * x_{i-1} +
f_i(x_{i-1})), w_i a learned vector (`admin_residual_scale` blocks). Its initial value
is profiled once, on one batch, in the order the sublayers run, per stack: w_1 = 1, and
after sublayer i the running ratio becomes sqrt(Var[w_i * x_{i-1}] + Var[f_i(x_{i-1})]),
which is w_{i+1}. The encoder and the decoder (self-attention, cross-attention and
feed-forward in turn) keep ratios of their own.

    profile = AdminProfile(mask)           # mask: [batch, length] 1 on real tokens
    encoder(x, admin_profile=profile)      # eager; sets every scale of the stack
    profile.records                        # [(w, Var[w x], Var[f(x)]), ...] in order

Here the variances are taken over the real tokens only (Transformer-Clinic's include
the padding of its batch) and with dropout off (its pass runs in training mode), so the
profile is a function of the weights and the batch alone.
"""

import numpy as np
from keras import ops


class AdminProfile:
    """The running ratio of one stack's profiling pass; `set_scale` is called by each
    Admin sublayer, in order, before it adds its residual."""

    def __init__(self, mask=None):
        self.mask = None if mask is None else np.asarray(ops.convert_to_numpy(mask)).astype(bool)
        self.ratio = 1.0
        self.records = []

    def _real(self, x):
        x = np.asarray(ops.convert_to_numpy(x), np.float64)
        return x if self.mask is None else x[self.mask]

    def set_scale(self, scale, residual, branch):
        """Sets `scale` (a [hidden] weight) to the running ratio, then moves the ratio
        on by this sublayer's variances."""
        omega = self.ratio
        scale.assign(ops.full(scale.shape, omega, dtype=scale.dtype))
        var_in = float(np.var(self._real(residual) * omega))
        var_out = float(np.var(self._real(branch)))
        self.ratio = float(np.sqrt(var_in + var_out))
        self.records.append((omega, var_in, var_out))
