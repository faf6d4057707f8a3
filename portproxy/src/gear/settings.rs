//! `gear:` in the configuration: OpenShift gear mode's settings.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::alloc::Allocation;
use crate::numbers::PortRange;
use crate::proxy_protocol::Version;

/// OpenShift gear mode.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GearConfig {
    /// The node's public address the mapped ports listen on (`PUBLIC_IP`).
    pub bind: IpAddr,
    /// Public ports that may be mapped (`PORT_BEGIN`–65535).
    pub ports: PortRange,
    /// Networks a mapping may point into; gears live on loopback.
    pub allowed_targets: Vec<IpNet>,
    /// How long a removed mapping's open connections may keep running.
    #[serde(with = "humantime_serde")]
    pub drain_grace: Duration,
    /// Send a PROXY header to gears (`none`, `v1`, `v2`); OpenShift gears expect none.
    pub send_proxy: SendProxy,
    /// The node.conf numbers behind `portproxy allocate` (same on every node of a
    /// district).
    pub allocation: Allocation,
}

impl Default for GearConfig {
    fn default() -> GearConfig {
        GearConfig {
            bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            ports: PortRange(35531..=65535),
            allowed_targets: default_allowed_targets(),
            drain_grace: Duration::from_secs(30),
            send_proxy: SendProxy::None,
            allocation: Allocation::default(),
        }
    }
}

/// A target's PROXY header wish, as YAML (`none`, `v1`, `v2`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    #[default]
    None,
    V1,
    V2,
}

impl SendProxy {
    pub fn version(self) -> Option<Version> {
        match self {
            SendProxy::None => None,
            SendProxy::V1 => Some(Version::V1),
            SendProxy::V2 => Some(Version::V2),
        }
    }
}

fn default_allowed_targets() -> Vec<IpNet> {
    vec![IpNet::V4(
        ipnet::Ipv4Net::new(Ipv4Addr::new(127, 0, 0, 0), 8).unwrap_or_default(),
    )]
}
