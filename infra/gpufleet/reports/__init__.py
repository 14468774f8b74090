"""Reports (rollout, gate, drift, audit): versioned JSON models first, rendered to Markdown, JUnit
XML and self-contained HTML."""
