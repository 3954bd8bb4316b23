//! skillbox-reach's integration tests: its routes served by a real node (store, peer network,
//! calls driver, API on TCP and its Unix socket), driven the way `skillbox mcp` drives them.

mod advertised;
