//! How an event loop waits when nothing was ready: by the core's one policy ([`vmmc::wait`]):
//! through the pacer on the simulator; elsewhere spin while that pays, yield where ranks
//! outnumber cores, then sleep on the process's doorbell, which the peers' transfers into this
//! node's rings ring. A loop resets it whenever it found work.

/// One event loop's wait, counted at its application's site.
pub(crate) struct Idle {
    site: &'static vmmc::wait::Site,
    wait: Option<vmmc::wait::Wait<'static>>,
}

impl Idle {
    pub(crate) fn new(site: &'static vmmc::wait::Site) -> Idle {
        Idle { site, wait: None }
    }

    /// Waits a turn; whether the wait is past its spin (then the caller checks its peers).
    pub(crate) fn wait(&mut self) -> bool {
        let site = self.site;
        let w = self.wait.get_or_insert_with(|| vmmc::wait::Wait::new(site));
        w.idle();
        w.resting()
    }

    /// The loop found work: the next wait starts from its spin.
    pub(crate) fn reset(&mut self) {
        self.wait = None;
    }
}
