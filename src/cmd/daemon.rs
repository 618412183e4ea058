//! `gpuwatch daemon`: the headless sampler with the HTTP server, the alert sinks and the local
//! history (see `crate::daemon`).

use crate::app::{Failure, Result, start, watch_set};
use crate::cli::{DaemonArgs, GlobalArgs};
use crate::config::Config;

pub(crate) fn daemon(g: &GlobalArgs, config: &Config, args: &DaemonArgs) -> Result<u8> {
    let server = crate::serve::Options::from_args(args, &config.daemon).map_err(Failure::setup)?;
    let sampler = start(g, config, None, true, true)?;
    let watch = watch_set(config, &sampler.info());
    // A simulated source (--demo, --scenario, --replay) records no history unless asked
    // with --history PATH: its jobs must not enter the real history.
    let simulated = g.simulated();
    let history = match (&args.history, simulated) {
        _ if args.no_history => None,
        (Some(path), _) => Some(path.clone()),
        (None, Some(flag)) => {
            crate::eprintln_safe!(
                "gpuwatch: no local history: the source is simulated ({flag}); pass \
                 --history PATH to record it in a file of its own"
            );
            None
        }
        (None, None) => crate::store::default_path(),
    };
    crate::daemon::run(&sampler, &watch, config, server, history.as_deref())
        .map_err(Failure::setup)?;
    Ok(0)
}
