"""Parsers of raw tool output, one module per tool.

Why: they are tolerant of format drift and explicit about what they could not read: every
result carries `problems` (things that stop a reliable reading) and, where lines were skipped,
`unparsed`, instead of raising on an odd line. Checks decide; parsers only read.
"""
