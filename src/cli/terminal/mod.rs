//! What the command line does for a person at a terminal: how results print (tables, aligned
//! objects, JSON) and how they look (colour, the pager).

pub mod output;
pub mod style;
