//! Tests for the scheduling core.
