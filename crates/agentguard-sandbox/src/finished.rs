//! What a run produced: the container's result and, for an egress run, its proxy's counts.

use agentguard_container::RunResult;

use crate::count::EgressCounts;

/// What a run produced: the container's result, and for an egress run its proxy's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The container's result.
    pub result: RunResult,
    /// The CONNECT requests the run's proxy allowed and refused (`None` for `network =
    /// "none"`).
    pub egress: Option<EgressCounts>,
}
