"""The ground floor: errors, nested records, paths and the results/ layout, atomic writes, progress, lock files,
the backend registry (`registry`: each backend's facts and the one door to its parts), and the study tables' columns
(`table`) with the labels every output shares. Imports nothing of specsweep's above it."""
