"""Who may run which bot command: the one permission policy, its text for ``--help``, its decisions.

Rules, in order (the first that allows a command wins; a refusal names the rule that refused):

1. **collaborator**: write, maintain or admin permission on the repository -> every command.
2. **PR author, same repository**: the author of a pull request whose head branch is in this
   repository (not a fork) -> ``/rerun-test <target>``, ``/rerun-failed`` and ``/culprit``, on their own PR.
3. **fork**: on a pull request from a fork only rule 1 applies: the dispatched job runs the PR's
   code on GPU runners.

Everyone may ask for ``--help``, and a command written with look-alike characters gets the hint
of what to type; neither starts anything, so neither is checked here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tools.rerun.github import Permission, PullRequest


class Action(str, enum.Enum):
    """What a command asks for, as the policy sees it."""

    RERUN_TEST = "`/rerun-test <target>`"
    RERUN_OWNER = "`/rerun-test --owner`"
    RERUN_FAILED = "`/rerun-failed`"
    RERUN_TIER = "`/rerun-tier` / `/rerun-stage`"
    CULPRIT = "`/culprit`"


# `/culprit` is checked exactly as `/rerun-test <target>`: both run a registered test on its tier.
AUTHOR_ACTIONS = frozenset({Action.RERUN_TEST, Action.RERUN_FAILED, Action.CULPRIT})

RULE_COLLABORATOR = "rule 1 (collaborator: write, maintain or admin)"
RULE_AUTHOR = "rule 2 (PR author, same repository)"
RULE_FORK = "rule 3 (pull request from a fork)"

POLICY_TEXT = f"""\
Who may run what (one policy, `tools/rerun/policy.py`):

| rule | who | may run |
|---|---|---|
| 1 | write, maintain or admin collaborators | every command |
| 2 | the PR's author, when the PR's branch is in this repository | {', '.join(a.value for a in Action if a in AUTHOR_ACTIONS)} on their own PR |
| 3 | anyone else on a PR from a fork | nothing: only rule 1 applies, since the dispatched job runs the PR's code on GPU runners |

`--help` is open to everyone."""


@dataclass(frozen=True)
class Decision:
    """``rule`` names the rule that allowed or refused; ``reason`` says why in one sentence."""

    allowed: bool
    rule: str
    reason: str


def decide(action: Action, user: str, permission: Permission, pull: PullRequest | None) -> Decision:
    """May ``user`` (with ``permission``) run ``action`` on ``pull``? ``pull`` may be None only
    when ``permission`` already allows everything (the caller skips reading it then)."""
    if permission.is_writer:
        return Decision(True, RULE_COLLABORATOR, f"{user} has {permission.permission} permission")
    level = f"your permission is `{permission.permission}` (role `{permission.role_name}`)"
    if pull is None:
        raise ValueError("the pull request is needed to decide for a user without write permission")
    is_author = user.lower() == pull.author.lower()
    if is_author and pull.is_fork:
        where = pull.head_repo or "a deleted fork"
        return Decision(False, RULE_FORK,
                        f"this pull request comes from `{where}`, and on fork pull requests only "
                        f"collaborators with write permission may start runs, since the dispatched job "
                        f"runs the PR's code on GPU runners; {level}")
    if is_author and action not in AUTHOR_ACTIONS:
        allowed = " and ".join(a.value for a in Action if a in AUTHOR_ACTIONS)
        return Decision(False, RULE_AUTHOR,
                        f"as the PR's author you may run {allowed}; {action.value} needs write "
                        f"permission ({level})")
    if is_author:
        return Decision(True, RULE_AUTHOR, f"{user} is the author of this same-repository pull request")
    return Decision(False, RULE_COLLABORATOR,
                    f"{action.value} needs write, maintain or admin permission, {level}, and you are not "
                    f"this pull request's author")


__all__ = ["AUTHOR_ACTIONS", "Action", "Decision", "POLICY_TEXT", "RULE_AUTHOR", "RULE_COLLABORATOR",
           "RULE_FORK", "decide"]
