/** core/v1 Node: only its name and labels, so node selectors work outside Kubernetes. */
import { z } from 'zod';
import { clusterMetadata } from './metadata.js';
import { checkDns1123Subdomain } from './names.js';

export const nodeSchema = z.object({
  apiVersion: z.literal('v1'),
  kind: z.literal('Node'),
  metadata: clusterMetadata((s) => checkDns1123Subdomain(s)),
});

export type NodeManifest = z.output<typeof nodeSchema>;
