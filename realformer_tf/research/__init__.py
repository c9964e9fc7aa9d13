"""Research tools: attention analysis, the seeded study and its report."""
