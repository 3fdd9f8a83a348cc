//! Inventory snapshots for Eno Compositions (issue K1). Being built.
