//! skillbox-node
