//! `gpuwatch pick`: the GPUs with the most free memory, in a form for scripts.

use crate::app::{Failure, Result, first_frame, runtime, start, write_stdout};
use crate::cli::{GlobalArgs, PickArgs};
use crate::config::Config;

pub(crate) fn pick(g: &GlobalArgs, config: &Config, _args: &PickArgs) -> Result<u8> {
    let rt = runtime()?;
    let sampler = start(g, config, None, false, false)?;
    let frame = first_frame(&rt, &sampler, config)?;
    let p = &config.pick;
    match crate::pick::pick(&frame.sample, p.min_free, p.count as usize) {
        Ok(gpus) => {
            write_stdout(&format!("{}\n", crate::pick::format(&gpus, p.format)))?;
            Ok(0)
        }
        Err(e) => Err(Failure::runtime(e)),
    }
}
