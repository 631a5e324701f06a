// Facts about network addresses that both the configuration and the egress guard rely on.
export { addressKind, type AddressKind } from './address.js';
export { certificateFingerprint } from './certificate.js';
