"""Steps with graph breaks and no eager computation between the graphs, shared by the
graph-break tests and bench/step_split.py: while a later graph runs, the step holds what
the graphs before it save."""

from __future__ import annotations

import torch


class BreakInTheMiddle(torch.nn.Module):
    """Two GELU stacks with a graph break between them and no eager computation: the
    second graph runs while the first's saves wait for the backward."""

    def __init__(self, d: int = 128) -> None:
        super().__init__()
        self.a = torch.nn.Sequential(*[torch.nn.Linear(d, d) for _ in range(3)], torch.nn.GELU())
        self.b = torch.nn.Sequential(*[torch.nn.Linear(d, d) for _ in range(3)], torch.nn.GELU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).sin()
        torch._dynamo.graph_break()
        return self.b(h).cos().pow(2).mean()


class ThreeGraphs(torch.nn.Module):
    """Three GELU stacks with graph breaks between them: while the third runs, the step
    holds what the first two save."""

    def __init__(self, d: int = 128) -> None:
        super().__init__()

        def stack(n: int) -> torch.nn.Module:
            return torch.nn.Sequential(
                *[torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU()) for _ in range(n)]
            )

        self.a, self.b, self.c = stack(3), stack(2), stack(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).sin()
        torch._dynamo.graph_break()
        h = self.b(h).cos()
        torch._dynamo.graph_break()
        return self.c(h).pow(2).mean()
