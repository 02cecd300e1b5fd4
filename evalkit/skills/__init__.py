"""Agent skills that `evalkit skills install` writes into a repository (one folder each,
with a SKILL.md), and the user docs it puts beside them."""
