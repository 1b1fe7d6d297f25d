"""Where the kit's plots are drawn (matplotlib, no display needed).

Two figures per check, shown in TensorBoard's Images dashboard because the
profiler plugin's own charts need the internet:

* where the time of a step went, original vs the learner's version;
* the distribution of step times, with the per-round speed-ups against the
  lab's threshold.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..measuring.breakdown import HOST_PARTS, LABELS, Breakdown  # noqa: E402

COLORS = {"DataLoader wait": "#d62728", "syncs": "#9467bd", "CPU ops": "#1f77b4", "other": "#c7c7c7",
          "device busy": "#2ca02c"}


def where_time_went(breakdowns: dict[str, Breakdown], title: str) -> Figure:
    names = list(breakdowns)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.9 * len(names)), dpi=100)
    for row, name in enumerate(names):
        b = breakdowns[name]
        left = 0.0
        for part in HOST_PARTS:
            width = b.host_ms[part]
            ax.barh(row, width, left=left, color=COLORS[part], label=LABELS[part] if row == 0 else None, height=0.55)
            if width > 0.08 * max(x.step_ms for x in breakdowns.values()):
                ax.text(left + width / 2, row, f"{width:.1f} ms\n{b.share(part):.0%}", ha="center",
                        va="center", fontsize=8)
            left += width
        if b.device_busy_ms > 0:
            ax.barh(row + 0.36, b.device_busy_ms, color=COLORS["device busy"], height=0.14,
                    label="device busy" if row == 0 else None)
        ax.text(left, row, f"  {b.step_ms:.1f} ms / step", va="center", fontsize=9)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("ms per profiled step (host timeline)")
    ax.set_xlim(0, 1.22 * max(b.step_ms for b in breakdowns.values()))
    ax.set_title(title, fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28 - 0.1 / len(names)), ncol=5, fontsize=8,
              frameon=False)
    fig.tight_layout()
    return fig


def step_times(times_ms: dict[str, list[float]], ratios: list[float], threshold: float | None,
               title: str, times_label: str = "step time, ms (every timed step of every run)",
               ratios_title: str = "Original / yours, per round", ratio_label: str = "speed-up per round",
               threshold_label: str = "threshold") -> Figure:
    """Left, the step times of each version; right, one ratio per round against the threshold (a lab's
    speed-up over the original; lab 7's gates give their slowdown, against max_slowdown)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100, gridspec_kw={"width_ratios": [3, 2]})
    names = [n for n in times_ms if times_ms[n]]
    left.boxplot([times_ms[n] for n in names], vert=False, showfliers=True, widths=0.5)
    left.set_yticks(range(1, len(names) + 1), names)
    left.invert_yaxis()
    left.set_xlabel(times_label)
    left.set_xlim(left=0)
    left.set_title("Step time", fontsize=10)
    if ratios:
        right.plot(range(1, len(ratios) + 1), ratios, "o", color="#1f77b4", label=ratio_label)
        if threshold is not None:
            right.axhline(threshold, color="#d62728", linestyle="--", label=f"{threshold_label} {threshold:g}×")
        right.set_xticks(range(1, len(ratios) + 1))
        right.set_xlabel("round")
        right.set_ylim(0, max(max(ratios), threshold or 0) * 1.45)
        right.legend(fontsize=8, loc="upper center", ncol=2, frameon=False)
    else:
        right.text(0.5, 0.5, "not timed:\nan earlier check failed", ha="center", va="center")
        right.set_xticks([])
        right.set_yticks([])
    right.set_title(ratios_title, fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
