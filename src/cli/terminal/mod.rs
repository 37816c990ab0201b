//! What the command line does for a person at a terminal: how results print (tables, aligned
//! objects, JSON), how they look (colour, the pager), and how the shell completes them.

pub(crate) mod complete;
pub(crate) mod output;
pub(crate) mod style;
