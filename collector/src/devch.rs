//! devch (in progress)
