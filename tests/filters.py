"""A test model shared by the checkpointing tests: a filter carrying a mean, a variance and a log-likelihood."""

import pytensor
import pytensor.tensor as pt


def filter_loglik(y, phi, q):
    """The log-likelihood trace of ``y`` under the filter with parameters ``phi`` and ``q`` (states start at 0, 1, 0)."""

    def step(y_t, m, p, ll, phi, q):
        m_pred, p_pred = phi * m, phi * phi * p + q
        s = p_pred + 0.3
        e = y_t - m_pred
        return m_pred + p_pred / s * e, (1 - p_pred / s) * p_pred, ll - 0.5 * (pt.log(s) + e * e / s)

    zero = pt.constant(0.0, dtype="float64")
    _, _, ll = pytensor.scan(step, sequences=[y], outputs_info=[zero, zero + 1, zero], non_sequences=[phi, q], return_updates=False)
    return ll
