//! The decision on one CONNECT, from its head to the checked addresses: parse, port,
//! allowlist, resolve once and check every answer, refuse the proxy's own address.
//!
//! A refusal carries two texts: what the client reads (the reason and the policy), and what
//! only the audit log gets (the addresses a name resolved to, the resolver's own error), so
//! that the proxy is never a DNS oracle for internal names.

use std::net::SocketAddr;

use agentguard_audit::error_chain;
use agentguard_netpin::{PinError, PinnedHost, pin};
use agentguard_policy::{Authority, Host, Reason};

use crate::head::parse_head;
use crate::limits::{descriptors_exhausted, out_of_descriptors};
use crate::live::Rules;
use crate::response::{Refusal, RefusalKind};
use crate::shared::Shared;

/// A CONNECT the policy allows: what to dial and what to record.
pub(crate) struct Allowed {
    /// The canonical `host:port`.
    pub(crate) target: String,
    pub(crate) port: u16,
    /// The allowlist pattern that matched (empty for an observed one).
    pub(crate) rule: String,
    /// `ok`, or `observed`: the policy refused it and an observe run let it through.
    pub(crate) reason: &'static str,
    /// The checked addresses: the only ones to dial.
    pub(crate) pinned: PinnedHost,
    /// The host as asked for, to check again when the rules change.
    pub(crate) host: Host,
}

/// A refused CONNECT, with the target when it could be parsed.
pub(crate) struct Refused {
    pub(crate) target: Option<String>,
    pub(crate) refusal: Refusal,
}

impl Refused {
    fn new(target: Option<&str>, refusal: Refusal) -> Refused {
        Refused {
            target: target.map(str::to_owned),
            refusal,
        }
    }
}

/// Everything between the head and the dial.
pub(crate) async fn decide(
    shared: &Shared,
    rules: &Rules,
    head: &[u8],
) -> Result<Allowed, Refused> {
    let request = parse_head(head)
        .map_err(|m| Refused::new(None, Refusal::new(RefusalKind::MalformedRequest, m)))?;
    if request.method != "CONNECT" {
        let message = format!(
            "method {} is not allowed; this proxy only tunnels CONNECT host:port",
            request.method
        );
        return Err(Refused::new(
            None,
            Refusal::new(RefusalKind::MethodNotAllowed, message),
        ));
    }
    let authority = Authority::parse(request.target, None).map_err(|e| {
        Refused::new(
            None,
            Refusal::new(RefusalKind::MalformedTarget, e.to_string()),
        )
    })?;
    let target = authority.to_string();
    let refused = |refusal| Refused::new(Some(&target), refusal);
    let Authority { host, port } = authority;
    let (name, rule, reason) = match (check(rules, &host, port), &host) {
        (Ok(permit), _) => (permit.name, permit.rule, "ok"),
        // Observe: a name the policy refuses by its host or port goes on to the address
        // check, which is never relaxed.
        (Err(refusal), Host::Domain(name))
            if shared.limits.observe
                && matches!(
                    refusal.kind,
                    RefusalKind::Denied(Reason::DomainNotAllowed | Reason::PortNotAllowed)
                ) =>
        {
            (name.clone(), String::new(), "observed")
        }
        (Err(refusal), _) => return Err(refused(refusal)),
    };
    let public_only = agentguard_policy::AddressPolicy::new();
    let addresses = rules.policy.as_ref().map_or(&public_only, |p| &p.addresses);
    let pinned = pin(
        rules.resolver.as_ref(),
        addresses,
        &name,
        shared.limits.max_answers,
    )
    .await
    .map_err(|e| refused(pin_refusal(&name.to_string(), &e)))?;
    if let Some(own) = shared.local_addr
        && let Some(ip) = pinned.addrs.iter().find(|ip| is_own(own, **ip, port))
    {
        return Err(refused(
            Refusal::new(
                RefusalKind::Denied(Reason::NonPublicAddress),
                "the target is this proxy's own listening address",
            )
            .with_detail(format!(
                "{name}:{port} resolved to {ip}, this proxy's own listening address"
            )),
        ));
    }
    Ok(Allowed {
        target,
        port,
        rule,
        reason,
        pinned,
        host,
    })
}

/// What `rules` say of `host:port` by name and port (before any address is known).
fn check(
    rules: &Rules,
    host: &Host,
    port: u16,
) -> Result<agentguard_policy::TargetPermit, Refusal> {
    match &rules.policy {
        Some(policy) => policy
            .check_target(host, port)
            .map_err(|d| Refusal::new(RefusalKind::Denied(d.reason), d.message)),
        None => Err(Refusal::new(
            RefusalKind::Denied(Reason::DomainNotAllowed),
            "this proxy tunnels to no host: its credential routes are the only way out",
        )),
    }
}

/// True when `ip:port` is the proxy itself, in any spelling: IPv4-mapped addresses are the
/// IPv4 address, and a proxy bound to the unspecified address listens on every address.
fn is_own(own: SocketAddr, ip: std::net::IpAddr, port: u16) -> bool {
    let own_ip = own.ip().to_canonical();
    port == own.port() && (ip.to_canonical() == own_ip || own_ip.is_unspecified())
}

/// The refusal for a name that could not be pinned: the client is told the reason and the
/// rule, the audit log what the resolver said.
fn pin_refusal(name: &str, error: &PinError) -> Refusal {
    let detail = error_chain(error);
    let refusal = match error {
        PinError::Denied(d) => Refusal::new(
            RefusalKind::Denied(d.reason),
            format!(
                "{name} resolved to an address that may not be reached (only public addresses and the operator's allowed ranges are; the addresses are in the audit log)"
            ),
        ),
        PinError::TooManyAnswers { limit, .. } => Refusal::new(
            RefusalKind::TooManyAnswers,
            format!("{name} resolved to more than {limit} addresses"),
        ),
        PinError::Dns { .. } if out_of_descriptors(error) || descriptors_exhausted() => {
            out_of_fds("resolving the name")
        }
        _ => Refusal::new(
            RefusalKind::DnsFailure,
            format!("the DNS lookup of {name} failed"),
        ),
    };
    refusal.with_detail(detail)
}

/// The refusal when the proxy ran out of file descriptors.
pub(crate) fn out_of_fds(while_doing: &str) -> Refusal {
    Refusal::new(
        RefusalKind::OutOfDescriptors,
        format!("the proxy ran out of file descriptors while {while_doing}; try again later"),
    )
}
