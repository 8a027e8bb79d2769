// RecallQL's GraphiQL page, bundled by build.mjs into static/build/graphiql/ so that it works
// with no internet access: React, GraphiQL, Monaco and their CSS and fonts are all local files.
import './workers.js';
import 'graphiql/style.css';

import { createGraphiQLFetcher } from '@graphiql/toolkit';
import { DOC_EXPLORER_PLUGIN } from '@graphiql/plugin-doc-explorer';
import { GraphiQL } from 'graphiql';
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';

import { DEFAULT_TABS } from './examples.js';

// The page is served by GET on the GraphQL endpoint itself, so that is where queries go, and where
// subscriptions go over a WebSocket (graphql-transport-ws). Each subscription opens its socket with the
// Headers tab's headers as connection_init's payload, which is where RecallQL reads a bearer token.
const url = `${window.location.origin}${window.location.pathname}`;
const fetcher = createGraphiQLFetcher({ url, subscriptionUrl: url.replace(/^http/, 'ws') });

// GraphiQL 5 fills the first tab's query from defaultTabs but not its variables; hand them over
// as initialVariables, and only on a first visit (later, the tabs saved in the browser win).
let firstVisit = true;
try {
  firstVisit = window.localStorage.getItem('graphiql:tabState') === null;
} catch {
  // storage disabled: GraphiQL starts from the defaults every time
}

function App() {
  return (
    <GraphiQL
      fetcher={fetcher}
      defaultTabs={DEFAULT_TABS}
      initialVariables={firstVisit ? DEFAULT_TABS[0].variables : undefined}
      defaultEditorToolsVisibility="variables"
      visiblePlugin={DOC_EXPLORER_PLUGIN}
      shouldPersistHeaders={false}
    >
      <GraphiQL.Logo>
        <a className="recallql-home" href="./" title="RecallQL memory explorer">
          RecallQL
        </a>
      </GraphiQL.Logo>
    </GraphiQL>
  );
}

createRoot(document.getElementById('graphiql')).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
