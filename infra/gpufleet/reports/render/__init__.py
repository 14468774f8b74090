"""Renderers of a `gpufleet.reports.document.Document`: Markdown (CI step summary, PR comment),
JUnit XML (CI test results), one self-contained HTML file with SVG charts. JSON is the source
model's own `model_dump_json`, written by `gpufleet.reports.write`.

Each renderer is a pure function Document -> str: no I/O, no clock, so the same document always
renders to the same bytes (golden files) and the writer alone decides where bytes go.
"""
