//! skillbox-peers
