//! What the composition root hands the lifecycle about the host: its facts and the driver selection, both
//! defined by the host layer (`iterion-host`) and re-exported here at their historical paths.
pub use iterion_host::{DriverChoice, HostFacts};
