"""The Lagrangian min-cut view of the problem: the cut network, the parametric sweep of
its multiplier, and the ``mincut`` solver built on them."""
