// What health says of the sealed postures' egress guard. A plain type that imports nothing: the dashboard's web code
// reads it too (daemon/dashboard/wire.ts), and its compiler checks every file it reaches.

export interface EgressHealth {
  guard: 'on';
  refused_since_first_boot: number;
  refused_since_boot: number;
  by_channel: Record<string, number>;
  by_destination: Record<string, number>;
  last_refused_at: string | null;
  /** The kernel's count for the systemd unit (IPAccounting=yes); null when not run by systemd. */
  kernel: { unit: string; ip_egress_bytes: number | null; ip_egress_packets: number | null; read_at: string } | null;
}
