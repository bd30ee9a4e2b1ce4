"""Before a server starts: the checks (`checks`, run by `preflight`) and how a group keeps its members
(`residency`, `sleep_plan`)."""
