//! skillbox-jc
