"""Report plugins: JUnit properties, self-contained HTML, skip summary."""
