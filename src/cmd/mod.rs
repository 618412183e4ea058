//! One file per subcommand: each turns its arguments and the resolved [`crate::config::Config`]
//! into an exit code, with the shared helpers of [`crate::app`]. `run` lives with the job
//! wrapper, in [`crate::run::command`].

pub(crate) mod daemon;
pub(crate) mod explain;
pub(crate) mod history;
pub(crate) mod man;
pub(crate) mod pick;
pub(crate) mod record;
pub(crate) mod snapshot;
pub(crate) mod tui;
